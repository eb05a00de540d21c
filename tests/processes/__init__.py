"""processes tier."""
