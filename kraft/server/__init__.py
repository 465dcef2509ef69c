"""asyncio runtime: listener, network client, timers, disk writer and admin HTTP."""
