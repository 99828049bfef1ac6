"""Large galleries and the index stack, above the vectors (:mod:`vis_embed.vectors`: the index
vocabulary, :class:`~vis_embed.vectors.index_spec.IndexSpec`, and the stored vectors) and below
the evaluation:

- :mod:`.index_choice`: the one chooser (which spec ``auto`` or a named kind builds);
- :mod:`.search`: the one factory (``build_index(vectors, spec)``), batched search and the exact
  reference; :mod:`.search_bf16` and :mod:`.quantized_index`: the bf16 shortlist and the code kinds;
- :mod:`.store` (``vis-embed index``: write_index, GalleryIndex), :mod:`.index_files` and
  :mod:`.faiss_headers` (reading an index directory safely), :mod:`.search_file` (``vis-embed search``);
- :mod:`.options` and :mod:`.cli`: the commands' flags and argument parsing.
"""
