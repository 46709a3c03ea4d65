//===- KilnAttrs.td - module attributes of kiln graphs -----*- tablegen -*-===//
//
// Model-wide settings a graph carries on its module, typed: the passes and
// the targets read them, nothing goes beside the IR as a string.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ATTRS_TD
#define KILN_ATTRS_TD

include "dialects/kiln/KilnDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Kiln_CheckpointFormat : I32EnumAttr<"CheckpointFormat",
    "the format of the checkpoint's expert weights", [
      I32EnumAttrCase<"BF16", 0, "bf16">,
      I32EnumAttrCase<"NVFP4", 1, "nvfp4">
    ]> {
  let cppNamespace = "::kiln";
  let genSpecializedAttr = 0;
}

def Kiln_CheckpointFormatAttr : EnumAttr<Kiln_Dialect, Kiln_CheckpointFormat, "weight_format"> {
  let summary = "the checkpoint format the graph reads: `#kiln.weight_format<nvfp4>`";
  let assemblyFormat = "`<` $value `>`";
}

def Kiln_LayoutAttr : AttrDef<Kiln_Dialect, "Layout"> {
  let mnemonic = "layout";
  let summary = "the parallel layout a sharded graph runs on: `#kiln.layout<tp = 2, ep = 2>`";
  let description = [{
    Set by `kiln-shard` (tensor- and expert-parallel ranks, which share
    max(tp, ep) devices) and by `kiln-insert-sp-collectives` (`sp = true`:
    tokens are split over each TP group between the attention blocks). A graph
    without it runs on one device.
  }];
  let parameters = (ins "int64_t":$tp, "int64_t":$ep,
                        DefaultValuedParameter<"bool", "false">:$sp);
  let assemblyFormat = "`<` struct(params) `>`";
  let extraClassDeclaration = [{
    int64_t devices() const { return getTp() > getEp() ? getTp() : getEp(); }
  }];
}

#endif // KILN_ATTRS_TD
