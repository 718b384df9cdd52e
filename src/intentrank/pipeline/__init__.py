"""intentrank."""
