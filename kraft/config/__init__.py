"""kraft.config: the one configuration model, below every package that reads it.

- `kraft.config.properties`: Java `.properties` text (parse, read, format).
- `kraft.config.server_properties`: `ServerProperties`, the model of `server.properties`.
- `kraft.config.node`: `NodeConfig`, what a running node is configured with (`load_config`).
- `kraft.config.address`: `parse_host_port`, the one HOST:PORT parser.

Nothing here imports the rest of `kraft`: storage, the node, the clients and the commands
read their configuration through it. The durable write of a properties file is storage's
(`kraft.storage.properties`).
"""
