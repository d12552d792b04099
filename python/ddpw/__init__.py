"""The course's models and data in Python, defined exactly as the C++ library defines them, so that
weights move both ways: a C++ run's --export-weights file loads here with torch.load, and a
state_dict saved here with torch.save starts a C++ run with --init-weights."""
from .data import Dataset, load_dataset, sampler_indices
from .models import LinearRegressor, MnistCnn, make_model, model_for_state_dict
from .figures import evaluate, first_batch_loss, loss_function, weights_checksum

__all__ = ["Dataset", "load_dataset", "sampler_indices", "LinearRegressor", "MnistCnn", "make_model",
           "model_for_state_dict", "evaluate", "first_batch_loss", "loss_function", "weights_checksum"]
