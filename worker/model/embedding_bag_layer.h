// EmbeddingBag (EmbeddingBagLayerSpec): one bag of table rows per example
// and sparse input, side by side, over the rows a SparseBatch holds for the
// current batch; backward sums each input's row gradients into the table's.
#ifndef PS_WORKER_MODEL_EMBEDDING_BAG_LAYER_H_
#define PS_WORKER_MODEL_EMBEDDING_BAG_LAYER_H_

#include <memory>
#include <vector>

#include "common/spec/model_graph.h"
#include "worker/model/layer.h"
#include "worker/model/sparse_batch.h"

namespace ps::worker::model {

// The SparseBatch uses of graph.layers[index] (one per input field, with
// the layer's table and weighting), in input order.
std::vector<SparseBatch::FieldUse> EmbeddingBagUses(const ModelGraph& graph,
                                                    int index);

// `sparse` (not owned) must hold the uses EmbeddingBagUses names and
// outlive the layer.
std::unique_ptr<Layer> MakeEmbeddingBagLayer(const ModelGraph& graph, int index,
                                             const SparseBatch* sparse);

}  // namespace ps::worker::model

#endif  // PS_WORKER_MODEL_EMBEDDING_BAG_LAYER_H_
