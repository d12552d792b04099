"""The twins of course/models.cpp: same modules, same names (the state_dict keys), same forward."""
import torch
import torch.nn.functional as F
from torch import nn


class LinearRegressor(nn.Module):
    """Linear(features, 1): the synthetic workload's model (C++: ddpw::LinearRegressor)."""

    def __init__(self, features: int = 20):
        super().__init__()
        self.fc = nn.Linear(features, 1)

    def forward(self, x):
        return self.fc(x)


class MnistCnn(nn.Module):
    """pytorch/examples mnist/main.py `Net` (C++: ddpw::MnistCnn). Input [N, 1, 28, 28]."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)  # 64 channels x 12 x 12
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        h = F.relu(self.conv1(x))
        h = F.relu(self.conv2(h))
        h = F.max_pool2d(h, 2)
        h = self.dropout1(h)
        h = torch.flatten(h, 1)
        h = self.dropout2(F.relu(self.fc1(h)))
        return F.log_softmax(self.fc2(h), dim=1)


def make_model(dataset: str) -> nn.Module:
    """The model a C++ step trains for --dataset."""
    return LinearRegressor() if dataset == "synthetic" else MnistCnn()


def model_for_state_dict(state_dict) -> str:
    """'synthetic' or 'cnn': which twin a state_dict's keys belong to."""
    return "cnn" if "conv1.weight" in state_dict else "synthetic"
