"""Embedding matrices as stored: Matryoshka truncation, quantization and the precision vocabulary
(:mod:`.transforms`, :mod:`.options`), and the form an encode output takes (:mod:`.stored_form`).

Below the model (numpy only, no torch or faiss): the encoder writes with it, galleries, evaluation,
the server and the mteb bridge read with it.
"""
