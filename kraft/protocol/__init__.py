"""Kafka wire protocol: primitive types, message schemas, generated codecs and framing.

Entry points: `kraft.protocol.messages` (typed bodies), `kraft.protocol.codec.encode/decode`
(bodies), `kraft.protocol.framing` (headers, frames, FrameDecoder), `kraft.protocol.api`
(api keys and versions), `kraft.protocol.primitives` (Reader/Writer and varints).
"""
