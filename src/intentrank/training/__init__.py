"""Training of the models intentrank cannot download offline (the cross-encoder reranker)."""

from intentrank.training.reranker import TrainResult, export_onnx_int8, train_reranker

__all__ = ["TrainResult", "export_onnx_int8", "train_reranker"]
