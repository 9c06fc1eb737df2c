"""Control on models: observers inside the rollout, output feedback, and the LQR /
LQG baselines a trained controller is compared with."""
