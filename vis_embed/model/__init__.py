"""Items -> vectors, by role: declarations (defaults, embedding_config, prompts, references), then
inputs/ (item -> model inputs), network/ (the embedding model), files/ (model files), runtime/
(the Embedder and encoding), each importing only those before it."""
