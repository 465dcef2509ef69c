"""Kafka wire protocol: primitive types, message schemas and framing."""
