# Sourced by the tests that train matrix factorization on MovieLens-format
# ratings (sparse_train_test.sh, fault_leftover_text_test.sh).
# mf_model: the job spec's model block: 16-dim user and item factors, a
# bias per user and per item, <u, v> + biases, mean squared error.
mf_model() {
  cat <<'EOT'
model {
  sparse_tables { name: "users" dim: 16 }
  sparse_tables { name: "items" dim: 16 }
  sparse_tables { name: "user_bias" dim: 1 init { kind: ZEROS } }
  sparse_tables { name: "item_bias" dim: 1 init { kind: ZEROS } }
  inputs { name: "user" }
  inputs { name: "item" }
  layers { name: "u" inputs: "user" embedding_bag { table: "users" } }
  layers { name: "v" inputs: "item" embedding_bag { table: "items" } }
  layers { name: "bu" inputs: "user" embedding_bag { table: "user_bias" } }
  layers { name: "bi" inputs: "item" embedding_bag { table: "item_bias" } }
  layers { name: "rating" inputs: [ "u", "v", "bu", "bi" ] dot {} }
  head { loss: MEAN_SQUARED_ERROR }
}
EOT
}
