"""Embedding providers, one module each (`builtin`, `openai_compatible`), a shared
base (`base.ProviderEmbedding`) and the backoff policy (`retry`).

Pick one with `rag_app.embeddings.get_embed_model(settings)`. Submodules are imported
directly so that using the builtin model never pays for importing the `openai` client.
"""
