#pragma once
// Reverse-mode autodiff on the graph IR, losses and optimizers as graph ops (docs/training.md).
//
// make_training_graph turns a forward graph into the graph of one training step:
//   inputs : the forward inputs, the loss target, every trainable parameter and optimizer state
//            tensor (the state carried from step to step), and "step" (a scalar: the 1-based step
//            index, for Adam's bias correction)
//   outputs: "loss" (a scalar), the forward outputs, and the updated parameter and state tensors
// Trainable parameters are the float initializers (rank >= 1) read by MatMul, Gemm, Conv, Add and
// LayerNormalization. The backward pass covers the ops listed in docs/training.md (matmuls, Conv,
// MaxPool, elementwise ops and activations, Softmax, LayerNormalization, reductions, shape ops);
// any other op on the path from a parameter to the loss is an error naming the node. Losses: mean squared error, and softmax
// cross-entropy against one-hot (or soft) targets, averaged over the batch. Optimizers: SGD,
// SGD with momentum, Adam (weight decay added to the gradient, as torch.optim.SGD/Adam do).
// Every op used is in the reference executor's set, so the training step runs where the forward
// graph runs.
#include <map>
#include <string>
#include <vector>

#include "isa/tensor.hpp"
#include "mapper/graph/graph.hpp"

namespace tessera::passes {

struct TrainingSpec {
  std::string loss = "mse";            // mse | softmax_cross_entropy
  std::string output;                  // the forward output the loss is taken of (default: the only one)
  std::string target = "target";       // the new graph input holding the targets
  std::string optimizer = "sgd";       // sgd | momentum | adam
  double learning_rate = 0.01, momentum = 0.9, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  // The learning rate as a tensor function of the 1-based step t (graph ops on the "step" input):
  // constant: lr; exponential: lr gamma^(t-1) (torch ExponentialLR); step: lr gamma^floor((t-1) /
  // step_size) (StepLR); warmup: lr min(1, t / warmup_steps) (linear warmup).
  std::string schedule = "constant";
  double gamma = 1.0;
  int64_t step_size = 1, warmup_steps = 1;
  // Mixed precision: forward and backward in `compute` (fp16 or bf16; f32 = off) on casts of the
  // fp32 master weights, inputs and targets; gradients cast back to fp32 for the optimizer.
  DType compute = DType::f32;
  // Dynamic loss scaling (torch.cuda.amp.GradScaler's rules): the loss gradient is multiplied by
  // the scale S (state "loss_scale"), the fp32 gradients divided by it; a step whose gradients are
  // not all finite is skipped (weights and state unchanged) and S *= backoff; after `interval`
  // finite steps in a row S *= growth. Outputs "loss_scale" (next S) and "skipped" (1 or 0).
  bool loss_scaling = false;
  double init_scale = 65536.0, growth = 2.0, backoff = 0.5;
  int64_t interval = 2000;
};

struct TrainingGraph {
  graph::Graph g;                                       // one training step
  std::vector<std::string> params;                      // trainable parameters (in graph order)
  // State carried across steps: (input name, output name holding its next value) -- the parameters
  // first, then optimizer state (velocities, Adam's first and second moments).
  std::vector<std::pair<std::string, std::string>> state;
  std::map<std::string, Tensor> initial;                // initial state: parameter values, zeros
  std::map<std::string, std::string> grad_of;           // parameter -> its gradient value (an output too)
  // Node name -> the phase of the step it belongs to: "forward", "loss", "backward", "optimizer".
  std::map<std::string, std::string> phase_of;
};

TrainingGraph make_training_graph(const graph::Graph& forward, const TrainingSpec& spec);

}  // namespace tessera::passes
