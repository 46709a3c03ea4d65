// RUN: kiln-opt %s -kiln-verify-weights -split-input-file -verify-diagnostics | FileCheck %s

// Consistent references, stacks included, pass through unchanged.
// CHECK-LABEL: func.func @consistent
func.func @consistent() -> (tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<2x4x8xbf16>) {
  // CHECK-COUNT-2: kiln.weight "model.layers.0.mlp.pooler.weight"
  %a = kiln.weight "model.layers.0.mlp.pooler.weight" : tensor<4x8xbf16>
  %b = kiln.weight "model.layers.0.mlp.pooler.weight" : tensor<4x8xbf16>
  // A single-expert reference agrees with the stack that holds it.
  %s = kiln.weight "model.layers.0.mlp.experts.{e}.up_proj.weight" : tensor<2x4x8xbf16>
  %one = kiln.weight "model.layers.0.mlp.experts.1.up_proj.weight" : tensor<4x8xbf16>
  return %a, %b, %s : tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<2x4x8xbf16>
}

// CHECK-LABEL: func.func @nvfp4_named
func.func @nvfp4_named() -> tensor<2x64x64xbf16> {
  %p = kiln.weight "model.layers.1.mlp.experts.{e}.gate_proj.weight" : tensor<2x64x32xui8>
  %s = kiln.weight "model.layers.1.mlp.experts.{e}.gate_proj.weight_scale" : tensor<2x64x4xf8E4M3FN>
  %g = kiln.weight "model.layers.1.mlp.experts.{e}.gate_proj.weight_scale_2" : tensor<2xf32>
  // CHECK: kiln.nvfp4_dequant
  %w = kiln.nvfp4_dequant %p, %s, %g : tensor<2x64x32xui8>, tensor<2x64x4xf8E4M3FN>, tensor<2xf32> -> tensor<2x64x64xbf16>
  return %w : tensor<2x64x64xbf16>
}

// -----

func.func @two_types() {
  // expected-note @+1 {{first used here}}
  %a = kiln.weight "model.norm.weight" : tensor<256xbf16>
  // expected-error @+1 {{checkpoint tensor 'model.norm.weight' is used as 'tensor<128xbf16>' here but as 'tensor<256xbf16>' elsewhere}}
  %b = kiln.weight "model.norm.weight" : tensor<128xbf16>
  return
}

// -----

func.func @stack_disagrees_with_single() {
  // expected-note @+1 {{first used here}}
  %one = kiln.weight "model.layers.0.mlp.experts.1.up_proj.weight" : tensor<4x4xbf16>
  // expected-error @+1 {{checkpoint tensor 'model.layers.0.mlp.experts.1.up_proj.weight' is used as 'tensor<4x8xbf16>' here}}
  %s = kiln.weight "model.layers.0.mlp.experts.{e}.up_proj.weight" : tensor<2x4x8xbf16>
  return
}

// -----

func.func @nvfp4_mismatched_module() {
  %p = kiln.weight "model.layers.1.mlp.experts.{e}.gate_proj.weight" : tensor<2x64x32xui8>
  %s = kiln.weight "model.layers.1.mlp.experts.{e}.up_proj.weight_scale" : tensor<2x64x4xf8E4M3FN>
  %g = kiln.weight "model.layers.1.mlp.experts.{e}.gate_proj.weight_scale_2" : tensor<2xf32>
  // expected-error @+1 {{scales operand must be 'model.layers.1.mlp.experts.{e}.gate_proj.weight_scale', got 'model.layers.1.mlp.experts.{e}.up_proj.weight_scale'}}
  %w = kiln.nvfp4_dequant %p, %s, %g : tensor<2x64x32xui8>, tensor<2x64x4xf8E4M3FN>, tensor<2xf32> -> tensor<2x64x64xbf16>
  return
}

// -----

func.func @nvfp4_packed_name() {
  %p = kiln.weight "model.layers.1.mlp.experts.{e}.gate_proj.qweight" : tensor<2x64x32xui8>
  %s = kiln.weight "model.layers.1.mlp.experts.{e}.gate_proj.weight_scale" : tensor<2x64x4xf8E4M3FN>
  %g = kiln.weight "model.layers.1.mlp.experts.{e}.gate_proj.weight_scale_2" : tensor<2xf32>
  // expected-error @+1 {{packed operand 'model.layers.1.mlp.experts.{e}.gate_proj.qweight' must be a checkpoint tensor named '<module>.weight'}}
  %w = kiln.nvfp4_dequant %p, %s, %g : tensor<2x64x32xui8>, tensor<2x64x4xf8E4M3FN>, tensor<2xf32> -> tensor<2x64x64xbf16>
  return
}
