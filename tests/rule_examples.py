"""Rules several test files state: the shared-input matmul fusion (two outputs), the
stride-1 kernel enlargement (a shape precondition), and two known-false candidates the
issue names (relu distributing over add, matmul commuted)."""

MATMUL_FUSION = """
rule matmul-concat-fuse(x: 2, y: 2, z: 2) {
  src {
    a = matmul(x, y)
    b = matmul(x, z)
    return a, b
  }
  tgt {
    c = concat{axis = 1}(y, z)
    d = matmul(x, c)
    e, f = split{axis = 1, sizes = [dim(y, 1), dim(z, 1)]}(d)
    return e, f
  }
}
"""

ENLARGE = """
rule enlarge-kernel(x: 4, w: 4) {
  where $s == [1, 1]
  src {
    a = conv2d{strides = $s, padding = "same", activation = $act, groups = 1}(x, w)
    return a
  }
  tgt {
    k = enlarge{kernel = [3, 3]}(w)
    a = conv2d{strides = $s, padding = "same", activation = $act, groups = 1}(x, k)
    return a
  }
}
"""

RELU_OVER_ADD = """
rule relu-over-add(x: 2, y: 2) {
  src {
    a = add(x, y)
    b = relu(a)
    return b
  }
  tgt {
    a = relu(x)
    b = relu(y)
    c = add(a, b)
    return c
  }
}
"""

MATMUL_COMMUTES = """
rule matmul-commutes(x: 2, y: 2) {
  src {
    a = matmul(x, y)
    return a
  }
  tgt {
    a = matmul(y, x)
    return a
  }
}
"""
