# Codes of the neural network's configuration, shared by the training kernels
# (_train.pyx) and the query core (_netcore.pyx, _query.pyx).  They must equal the
# tables CTX_CODES, ACT_CODES, OUT_CODES and _OBJ in nplm/neural/network.py.
cdef enum:
    CTX_FULL = 0
    CTX_DIAGONAL = 1
    ACT_RELU = 0
    ACT_TANH = 1
    ACT_IDENTITY = 2
    OUT_SOFTMAX = 0
    OUT_CLASS = 1
    OUT_TREE = 2
    OBJ_MLE = 0
    OBJ_NCE = 1
