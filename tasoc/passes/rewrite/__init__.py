"""equality-rewrite: TASO's verified graph substitutions (rule generator, rule library,
matcher and search), as a compiler pass over the `graph` dialect."""
