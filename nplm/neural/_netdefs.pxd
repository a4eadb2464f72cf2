# Codes of the neural network's configuration, shared by the training kernels
# (_nn.pyx) and the query core (_nquery.pyx).  They must equal the tables _CTX,
# _ACT, _OUT and _OBJ in nplm/neural.py.
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
