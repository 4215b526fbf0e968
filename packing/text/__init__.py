"""Text rows through a tokenizer: tokenizers, bounded chat-template rendering, chat turn spans, encoding with
exact loss masks, and preparing a recipe's tokenizer and pad id. Internal: the public names are in ``packing``.
"""
