"""Embedding matrices as stored: Matryoshka truncation, quantization and the precision vocabulary
(:mod:`.transforms`, :mod:`.options`), the form an encode output takes (:mod:`.stored_form`), and
the index vocabulary (:mod:`.index_spec`: IndexSpec, the kinds and their ``--index`` aliases,
bytes per vector).

Below the model (numpy and pydantic; no torch or faiss; options and index_spec import no numpy,
so ``--help`` reads them): the encoder writes with it, galleries, evaluation, the server and the
mteb bridge read with it.
"""
