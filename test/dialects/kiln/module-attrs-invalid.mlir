// The dialect verifies the types of the graph's module attributes.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{'kiln.weight_format' must be #kiln.weight_format<bf16|nvfp4>, got "nvfp4"}}
module attributes {kiln.weight_format = "nvfp4"} {
}

// -----

// expected-error @+1 {{'kiln.layout' must be #kiln.layout<tp = N, ep = M>}}
module attributes {kiln.layout = {tp = 2 : i64, ep = 2 : i64}} {
}

// -----

// expected-error @+1 {{tp and ep must be at least 1 and one must divide the other}}
module attributes {kiln.layout = #kiln.layout<tp = 2, ep = 3>} {
}

// -----

// expected-error @+1 {{tp and ep must be at least 1 and one must divide the other}}
module attributes {kiln.layout = #kiln.layout<tp = 0, ep = 2>} {
}

// -----

// expected-error @+1 {{'kiln.model' must be a string}}
module attributes {kiln.model = 3 : i64} {
}

// -----

module {
  // expected-error @+1 {{'kiln.layout' belongs on the graph's module}}
  func.func @f() attributes {kiln.layout = #kiln.layout<tp = 2, ep = 2>} {
    return
  }
}

// -----

// expected-error @+2 {{expected ::kiln::CheckpointFormat to be one of: bf16, nvfp4}}
// expected-error @+1 {{failed to parse Kiln_CheckpointFormatAttr parameter 'value'}}
module attributes {kiln.weight_format = #kiln.weight_format<fp8>} {
}
