"""Generated question sets: categorised single- and two-document questions with known
source documents, written as BEIR datasets (see ``generator.py``)."""
