"""One module per command group of the `semworld` CLI."""
