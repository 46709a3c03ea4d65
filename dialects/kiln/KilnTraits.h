// Traits of kiln ops that passes ask for instead of listing op names, so that
// a new op (a fused one, say) declares once what every pass must know of it.
#pragma once

#include "mlir/IR/OpDefinition.h"

namespace kiln::OpTrait {

// The op works on each attention head of a [T, heads, head_dim] activation
// on its own (or, kiln.split_heads, splits one into heads): it sits between a
// QKV projection and attention. kiln-shard narrows such a chain with its
// projection; kiln-insert-sp-collectives runs it on the whole sequence, like
// attention. The ops' own verifiers check their shapes.
template <typename ConcreteType>
class HeadWise : public mlir::OpTrait::TraitBase<ConcreteType, HeadWise> {};

// The op needs every token of the sequence (attention, the merge of its
// heads, the output head): kiln-insert-sp-collectives gathers a token-sharded
// operand back before it. Ops that work token by token implement
// TokenWiseOp (KilnInterfaces.td) instead; an op with neither takes no
// token-sharded operand.
template <typename ConcreteType>
class WholeSequence : public mlir::OpTrait::TraitBase<ConcreteType, WholeSequence> {};

} // namespace kiln::OpTrait
