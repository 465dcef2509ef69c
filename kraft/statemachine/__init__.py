"""Application state machines replicated through the KRaft log.

`base.StateMachine` is the interface the runtime drives (apply committed batches, write a
snapshot, load a snapshot); `kv.KVStore` is the built-in key-value store.
"""
