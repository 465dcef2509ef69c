"""Record batch v2 (magic 2) with CRC32C, and KRaft control records."""
