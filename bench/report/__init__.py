"""The report writers: the comparison's charts in docs/img/ (`charts`)."""
