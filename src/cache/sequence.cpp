#include "kvattn/cache/sequence.h"

#include <utility>

#include "kvattn/core/error.h"

namespace kvattn {

Sequence::Sequence(SeqId id, std::vector<int32_t> prompt_token_ids)
    : id_(id), tokens_(std::move(prompt_token_ids)) {
  KVATTN_CHECK(!tokens_.empty(), "Sequence: prompt_token_ids of sequence ", id,
               " must not be empty");
  for (size_t i = 0; i < tokens_.size(); ++i) {
    KVATTN_CHECK(tokens_[i] >= 0, "Sequence: prompt_token_ids[", i, "] of sequence ", id,
                 " must be >= 0 but is ", tokens_[i]);
  }
  num_prompt_tokens_ = num_tokens();
}

Sequence::Sequence(Sequence&& other) noexcept { *this = std::move(other); }

Sequence& Sequence::operator=(Sequence&& other) noexcept {
  if (this == &other) return *this;
  id_ = other.id_;
  status_ = other.status_;
  tokens_ = std::move(other.tokens_);
  num_prompt_tokens_ = std::exchange(other.num_prompt_tokens_, 0);
  num_computed_tokens_ = std::exchange(other.num_computed_tokens_, 0);
  num_cached_tokens_ = std::exchange(other.num_cached_tokens_, 0);
  block_table_ = std::move(other.block_table_);
  owner_ = std::exchange(other.owner_, nullptr);
  table_id_ = std::exchange(other.table_id_, 0);
  num_offered_blocks_ = std::exchange(other.num_offered_blocks_, 0);
  offer_parent_ = std::exchange(other.offer_parent_, -1);
  offer_parent_gen_ = std::exchange(other.offer_parent_gen_, 0);
  offers_stopped_ = std::exchange(other.offers_stopped_, false);
  block_hashes_ = std::move(other.block_hashes_);
  hashes_fn_ = std::exchange(other.hashes_fn_, nullptr);
  hashes_block_size_ = std::exchange(other.hashes_block_size_, 0);
  match_hits_ = std::move(other.match_hits_);
  match_epoch_ = std::exchange(other.match_epoch_, 0);
  match_num_tokens_ = std::exchange(other.match_num_tokens_, 0);
  match_collided_ = std::exchange(other.match_collided_, false);
  reads_prefix_cache_ = std::exchange(other.reads_prefix_cache_, true);
  build_stamp_ = std::exchange(other.build_stamp_, 0);
  build_row_ = std::exchange(other.build_row_, -1);
  other.tokens_.clear();
  other.block_table_.clear();
  other.block_hashes_.clear();
  other.match_hits_.clear();
  return *this;
}

std::span<const int32_t> Sequence::prompt_token_ids() const {
  return std::span<const int32_t>(tokens_).first(static_cast<size_t>(num_prompt_tokens_));
}

std::span<const int32_t> Sequence::completion_token_ids() const {
  return std::span<const int32_t>(tokens_).subspan(static_cast<size_t>(num_prompt_tokens_));
}

int32_t Sequence::last_token() const {
  KVATTN_CHECK(!tokens_.empty(), "Sequence::last_token: sequence ", id_, " has no tokens");
  return tokens_.back();
}

void Sequence::append_token(int32_t token) {
  KVATTN_CHECK(token >= 0, "Sequence::append_token: token of sequence ", id_,
               " must be >= 0 but is ", token);
  tokens_.push_back(token);
}

void Sequence::append_tokens(std::span<const int32_t> tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    KVATTN_CHECK(tokens[i] >= 0, "Sequence::append_tokens: tokens[", i, "] of sequence ", id_,
                 " must be >= 0 but is ", tokens[i]);
  }
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
}

}  // namespace kvattn
