"""The `train_controller` kind on a model file: typed configs, the plant file and
its checks, the set-point task through the model's observer, and the LQG baseline."""
