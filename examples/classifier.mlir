// A 2-layer MLP classifier: a batch of 32 vectors of 64 features -> scores of 10
// classes. The README's training example: `tasoc opt` with `autodiff` turns it into a
// training step, `tasoc run --steps 30` trains it on one synthetic batch.
func.func @main(%x: tensor<32x64xf32>,
                %w1: tensor<64x64xf32> {graph.param}, %b1: tensor<64xf32> {graph.param},
                %w2: tensor<64x10xf32> {graph.param}, %b2: tensor<10xf32> {graph.param})
    -> tensor<32x10xf32> {
  %0 = graph.matmul %x, %w1 : tensor<32x64xf32>
  %1 = graph.add %0, %b1 : tensor<32x64xf32>
  %2 = graph.relu %1 : tensor<32x64xf32>
  %3 = graph.matmul %2, %w2 : tensor<32x10xf32>
  %scores = graph.add %3, %b2 : tensor<32x10xf32>
  func.return %scores : tensor<32x10xf32>
}
