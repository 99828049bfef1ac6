"""Large galleries: Matryoshka truncation and quantized vectors (:mod:`.vectors`), persistent
faiss indexes (:mod:`.store`) and search over them (:mod:`.search_file`); commands in :mod:`.cli`."""
