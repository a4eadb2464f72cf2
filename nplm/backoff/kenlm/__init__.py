"""KenLM's own binary model files (build_binary's probing and trie layouts)."""
