"""db tier."""
