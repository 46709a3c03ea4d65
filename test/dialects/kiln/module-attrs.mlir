// The graph's module attributes are typed: they print and parse as
// #kiln.weight_format<...> and #kiln.layout<...>, and round-trip.
// RUN: kiln-opt %s | kiln-opt | FileCheck %s

// CHECK: module attributes {kiln.layout = #kiln.layout<tp = 2, ep = 4, sp = true>, kiln.model = "muse-spark-tiny", kiln.weight_format = #kiln.weight_format<nvfp4>}
module attributes {kiln.model = "muse-spark-tiny",
                   kiln.weight_format = #kiln.weight_format<nvfp4>,
                   kiln.layout = #kiln.layout<tp = 2, ep = 4, sp = true>} {
}

// -----
// sp defaults to false and is not printed.
// RUN: kiln-opt %s -split-input-file | FileCheck %s --check-prefix=DEFAULT
// DEFAULT: kiln.layout = #kiln.layout<tp = 2, ep = 2>}
module attributes {kiln.layout = #kiln.layout<tp = 2, ep = 2, sp = false>} {
}
