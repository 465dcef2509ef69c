"""The systems the benchmarks run: kraft-quorum's own loopback quorum (`kraft_cluster`) and its
peers, PySyncObj and etcd (`peers`, installed by `setup_peers.sh`), with the plumbing every
system's runner shares (drivers, closed loops, CPU accounting)."""
