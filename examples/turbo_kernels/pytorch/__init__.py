"""PyTorch front end: ``core`` (configs), ``ops`` (user API), ``kernels`` (dispatch)."""
