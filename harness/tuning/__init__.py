"""``python -m harness tune DEPLOYMENT``: search a deployment's config levers with Optuna, every
candidate on its own server and through the deployment's checks before any measurement (docs/tuning.md)."""
