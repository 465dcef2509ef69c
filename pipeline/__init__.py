"""kraft audit: PySpark data source and audit jobs over replica logs (import name: kraft_pipeline)."""
