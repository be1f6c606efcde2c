"""The container image's build steps (fetch.sh, install.sh) and the check that ends them (check.py)."""
