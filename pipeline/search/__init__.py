"""Search over the warehouse: the Searcher (lanes + reciprocal rank fusion), query syntax, snippets, synonyms,
Japanese -> English translation, tags, note reading, link neighbours and the usage boost."""
