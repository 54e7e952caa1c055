"""Models: the project's own zoo (no torchvision) and loading of user models by import path."""
