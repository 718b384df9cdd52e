"""Adapters that put intentrank pipelines into other frameworks, each an optional extra:

- ``intentrank.integrations.langchain`` (``pip install 'intentrank[langchain]'``): a
  LangChain ``BaseRetriever`` and ``BaseDocumentCompressor``;
- ``intentrank.integrations.llamaindex`` (``pip install 'intentrank[llamaindex]'``): a
  LlamaIndex ``BaseRetriever`` and ``BaseNodePostprocessor``.

Both rest on :mod:`intentrank.integrations.common`, which imports no framework. Importing
this package imports nothing; an adapter module whose framework is missing raises
:class:`~intentrank.extras.MissingExtraError` naming the extra. See docs/integrations.md.
"""
