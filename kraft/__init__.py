"""kraft-quorum: a KRaft (Kafka Raft) controller quorum node written in Python."""

__version__ = "0.1.0"
