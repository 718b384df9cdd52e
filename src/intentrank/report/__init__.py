"""Reports of experiments: Markdown tables, a self-contained HTML page with plots, JSON."""
