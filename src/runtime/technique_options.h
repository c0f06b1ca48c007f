#pragma once
// The techniques' options, one struct per technique, each declared in a torch-free header beside it
// (techniques/<family>/<name>_options.h) and held here by type: RuntimeOptions stores them without knowing them,
// so a technique adds its options without a change to any runtime file. Torch-free.
//
// Value semantics: a copy is a deep copy (each struct cloned), a move is cheap. An absent struct reads as
// its default-constructed value, so an empty store is every technique at its default (the baseline).
#include <memory>
#include <typeindex>
#include <typeinfo>
#include <unordered_map>
#include <utility>

namespace autooptim::runtime {

class TechniqueOptions {
 public:
  TechniqueOptions() = default;
  TechniqueOptions(const TechniqueOptions& other) {
    for (const auto& [type, item] : other.items_) items_.emplace(type, item->clone());
  }
  TechniqueOptions(TechniqueOptions&&) noexcept = default;
  TechniqueOptions& operator=(const TechniqueOptions& other) {
    if (this != &other) {
      TechniqueOptions copy(other);
      items_.swap(copy.items_);
    }
    return *this;
  }
  TechniqueOptions& operator=(TechniqueOptions&&) noexcept = default;

  // The stored T, or a default T when none was stored.
  template <class T>
  const T& get() const {
    const auto it = items_.find(std::type_index(typeid(T)));
    if (it == items_.end()) return default_of<T>();
    return static_cast<const Holder<T>&>(*it->second).value;
  }
  // The stored T to change, a default T stored first when there was none.
  // (A stored T is only looked up, so readers of a shared non-const store that holds T change nothing.)
  template <class T>
  T& edit() {
    const std::type_index type(typeid(T));
    auto it = items_.find(type);
    if (it == items_.end()) it = items_.emplace(type, std::make_unique<Holder<T>>()).first;
    return static_cast<Holder<T>&>(*it->second).value;
  }
  template <class T>
  bool has() const {
    return items_.count(std::type_index(typeid(T))) > 0;
  }

 private:
  struct Item {
    virtual ~Item() = default;
    virtual std::unique_ptr<Item> clone() const = 0;
  };
  template <class T>
  struct Holder : Item {
    T value{};
    std::unique_ptr<Item> clone() const override { return std::make_unique<Holder>(*this); }
  };
  template <class T>
  static const T& default_of() {
    static const T value{};
    return value;
  }

  std::unordered_map<std::type_index, std::unique_ptr<Item>> items_;
};

}  // namespace autooptim::runtime
