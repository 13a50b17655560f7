"""Model providers behind one ModelClient protocol (see base.py) and the llm.toml slot config."""
