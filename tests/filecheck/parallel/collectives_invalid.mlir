// Each collective given a transition it does not make, with the verifier's message:
// a collective does exactly what its name says, so a program's communication can be
// read (and costed) from its ops.
// RUN: %tasoc opt %s --split-input-file --verify-diagnostics | filecheck %s

// An all_gather that also splits a dim.
// CHECK: {{^}}'parallel.all_gather': all_gather only joins split dims, not #parallel.sharding<@m, [["x"], []]> into #parallel.sharding<@m, [["x"], ["y"]]>
parallel.mesh @m ["x" = 2, "y" = 2]
func.func @gather_slices(%a: tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>) -> tensor<8x4xf32, #parallel.sharding<@m, [["x"], ["y"]]>> {
  %y = parallel.all_gather %a : tensor<8x4xf32, #parallel.sharding<@m, [["x"], ["y"]]>>
  func.return %y : tensor<8x4xf32, #parallel.sharding<@m, [["x"], ["y"]]>>
}

// -----

// An all_slice that joins a dim.
// CHECK: {{^}}'parallel.all_slice': all_slice only splits dims further, not #parallel.sharding<@m, [["x"], []]> into #parallel.sharding<@m, [[], []]>
parallel.mesh @m ["x" = 2, "y" = 2]
func.func @slice_gathers(%a: tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>) -> tensor<8x4xf32, #parallel.sharding<@m, [[], []]>> {
  %y = parallel.all_slice %a : tensor<8x4xf32, #parallel.sharding<@m, [[], []]>>
  func.return %y : tensor<8x4xf32, #parallel.sharding<@m, [[], []]>>
}

// -----

// A collective that changes nothing is refused too.
// CHECK: {{^}}'parallel.all_slice': all_slice only splits dims further, not #parallel.sharding<@m, [["x"], []]> into #parallel.sharding<@m, [["x"], []]>
parallel.mesh @m ["x" = 2, "y" = 2]
func.func @slice_nothing(%a: tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>) -> tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>> {
  %y = parallel.all_slice %a : tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>
  func.return %y : tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>
}

// -----

// An all_reduce of a value that holds no partial sums.
// CHECK: {{^}}'parallel.all_reduce': all_reduce only completes partial sums, not #parallel.sharding<@m, [["x"], []]> into #parallel.sharding<@m, [["x"], []]>
parallel.mesh @m ["x" = 2, "y" = 2]
func.func @reduce_complete(%a: tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>) -> tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>> {
  %y = parallel.all_reduce %a : tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>
  func.return %y : tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>
}

// -----

// A reduce_scatter that splits by an axis other than the one it completes.
// CHECK: {{^}}'parallel.reduce_scatter': reduce_scatter splits dims by the axes it completes, not #parallel.sharding<@m, [[], []], unreduced = ["x"]> into #parallel.sharding<@m, [["y"], []]>
parallel.mesh @m ["x" = 2, "y" = 2]
func.func @reduce_scatter_other_axis(%a: tensor<8x4xf32, #parallel.sharding<@m, [[], []], unreduced = ["x"]>>) -> tensor<8x4xf32, #parallel.sharding<@m, [["y"], []]>> {
  %y = parallel.reduce_scatter %a : tensor<8x4xf32, #parallel.sharding<@m, [["y"], []]>>
  func.return %y : tensor<8x4xf32, #parallel.sharding<@m, [["y"], []]>>
}

// -----

// An all_to_all that only gathers.
// CHECK: {{^}}'parallel.all_to_all': all_to_all moves the last axes of one dim to the end of another, not #parallel.sharding<@m, [["x"], []]> into #parallel.sharding<@m, [[], []]>
parallel.mesh @m ["x" = 2, "y" = 2]
func.func @all_to_all_gathers(%a: tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>) -> tensor<8x4xf32, #parallel.sharding<@m, [[], []]>> {
  %y = parallel.all_to_all %a : tensor<8x4xf32, #parallel.sharding<@m, [[], []]>>
  func.return %y : tensor<8x4xf32, #parallel.sharding<@m, [[], []]>>
}

// -----

// A replicate onto the mesh the value is on.
// CHECK: {{^}}'parallel.replicate': replicate copies onto another mesh; #parallel.sharding<@m, [["x"], []]> into #parallel.sharding<@m, [[], []]> stays on @m
parallel.mesh @m ["x" = 2, "y" = 2]
func.func @replicate_same_mesh(%a: tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>) -> tensor<8x4xf32, #parallel.sharding<@m, [[], []]>> {
  %y = parallel.replicate %a : tensor<8x4xf32, #parallel.sharding<@m, [[], []]>>
  func.return %y : tensor<8x4xf32, #parallel.sharding<@m, [[], []]>>
}

// -----

// Partial sums cannot move between device groups.
// CHECK: {{^}}'parallel.replicate': replicate moves complete values only, not partial sums: #parallel.sharding<@m, [[], []], unreduced = ["x"]> into #parallel.sharding<@n, [[], []]>
parallel.mesh @m ["x" = 2, "y" = 2]
parallel.mesh @n ["d" = 2]
func.func @replicate_partial(%a: tensor<8x4xf32, #parallel.sharding<@m, [[], []], unreduced = ["x"]>>) -> tensor<8x4xf32, #parallel.sharding<@n, [[], []]>> {
  %y = parallel.replicate %a : tensor<8x4xf32, #parallel.sharding<@n, [[], []]>>
  func.return %y : tensor<8x4xf32, #parallel.sharding<@n, [[], []]>>
}

// -----

// Only replicate changes meshes.
// CHECK: {{^}}'parallel.all_gather': values are on different meshes @m, @n: move them with parallel.replicate first
parallel.mesh @m ["x" = 2, "y" = 2]
parallel.mesh @n ["d" = 2]
func.func @gather_across_meshes(%a: tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>) -> tensor<8x4xf32, #parallel.sharding<@n, [[], []]>> {
  %y = parallel.all_gather %a : tensor<8x4xf32, #parallel.sharding<@n, [[], []]>>
  func.return %y : tensor<8x4xf32, #parallel.sharding<@n, [[], []]>>
}

// -----

// A collective changes the layout, never the logical value.
// CHECK: {{^}}'parallel.all_gather': result 4x8xf32 differs from operand 8x4xf32 beyond its layout
parallel.mesh @m ["x" = 2, "y" = 2]
func.func @gather_reshapes(%a: tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>) -> tensor<4x8xf32, #parallel.sharding<@m, [[], []]>> {
  %y = parallel.all_gather %a : tensor<4x8xf32, #parallel.sharding<@m, [[], []]>>
  func.return %y : tensor<4x8xf32, #parallel.sharding<@m, [[], []]>>
}

// -----

// A collective's operand says how it lies on the mesh.
// CHECK: {{^}}'parallel.all_gather': value of type 8x4xf32 has no sharding beside sharded ones
parallel.mesh @m ["x" = 2, "y" = 2]
func.func @gather_plain(%a: tensor<8x4xf32>) -> tensor<8x4xf32, #parallel.sharding<@m, [[], []]>> {
  %y = parallel.all_gather %a : tensor<8x4xf32, #parallel.sharding<@m, [[], []]>>
  func.return %y : tensor<8x4xf32, #parallel.sharding<@m, [[], []]>>
}
