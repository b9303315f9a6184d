"""gradcheck: central finite differences in float64 against backward (placeholder)."""


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3):
    raise NotImplementedError("gradcheck lands with the autograd issue")
