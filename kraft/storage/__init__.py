"""On-disk state: segmented log, leader-epoch cache, snapshots, quorum-state, meta.properties."""
