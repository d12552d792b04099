// Python's torch.save writes a zip archive (LibTorch's PyTorchStreamWriter/Reader read and write
// the same container) holding `data.pkl`, a pickle whose tensors point at records `data/<key>`.
// Writing uses LibTorch's own pickler, told not to tag the dict with its TorchScript type (the
// tag is a global that Python's weights_only=True refuses). Reading cannot use LibTorch's
// unpickler: it turns the OrderedDict that every model.state_dict() is into None and fails
// (pytorch/pytorch#100741, open), so this file reads the pickle itself, allowing what a state_dict
// needs and nothing else, as Python's weights_only unpickler does: no object of another class is
// ever built.
#include "ddp/torch_pickle.h"

#include <caffe2/serialize/inline_container.h>     // defines: PyTorchStreamReader/Writer (the zip)
#include <torch/csrc/jit/serialization/pickler.h>  // defines: Pickler, getWriteableTensorData

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <unordered_map>

#include "ddp/error.h"

namespace ddp {
namespace {

const char* const kSaveHint = "save the model's weights in Python with torch.save(model.state_dict(), path)";

// ---- reading: the pickle opcodes torch.save emits (protocol 2, the default; 4 and 5 also) ------

struct PickleValue;
using Value = std::shared_ptr<PickleValue>;

struct PickleValue {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kTuple, kList, kDict, kGlobal, kStorage, kTensor };
  Kind kind = Kind::kNone;
  int64_t integer = 0;                                 // kBool, kInt
  double real = 0;                                     // kFloat
  std::string text;                                    // kString; kGlobal: "module.name"
  std::vector<Value> items;                            // kTuple, kList
  std::vector<std::pair<Value, Value>> entries;        // kDict, in insertion order
  torch::Tensor tensor;                                // kStorage (1-D, all of it), kTensor
  c10::ScalarType dtype = c10::ScalarType::Undefined;  // kGlobal of a storage class
};

Value make(PickleValue::Kind kind) {
  auto v = std::make_shared<PickleValue>();
  v->kind = kind;
  return v;
}

// What a value is, in Python's words, for messages.
std::string describe(const PickleValue& v) {
  switch (v.kind) {
    case PickleValue::Kind::kNone: return "None";
    case PickleValue::Kind::kBool: return "a bool";
    case PickleValue::Kind::kInt: return "an int";
    case PickleValue::Kind::kFloat: return "a float";
    case PickleValue::Kind::kString: return "a str";
    case PickleValue::Kind::kTuple: return "a tuple";
    case PickleValue::Kind::kList: return "a list";
    case PickleValue::Kind::kDict: return "a dict";
    case PickleValue::Kind::kGlobal: return "the Python object " + v.text;
    case PickleValue::Kind::kStorage: return "a tensor storage";
    case PickleValue::Kind::kTensor: return "a tensor";
  }
  return "?";
}

// The storage classes a pickled tensor names (torch.FloatStorage, ...), by element type.
const std::map<std::string, c10::ScalarType>& storage_classes() {
  static const std::map<std::string, c10::ScalarType> classes = {
      {"torch.FloatStorage", c10::ScalarType::Float},
      {"torch.DoubleStorage", c10::ScalarType::Double},
      {"torch.HalfStorage", c10::ScalarType::Half},
      {"torch.BFloat16Storage", c10::ScalarType::BFloat16},
      {"torch.LongStorage", c10::ScalarType::Long},
      {"torch.IntStorage", c10::ScalarType::Int},
      {"torch.ShortStorage", c10::ScalarType::Short},
      {"torch.CharStorage", c10::ScalarType::Char},
      {"torch.ByteStorage", c10::ScalarType::Byte},
      {"torch.BoolStorage", c10::ScalarType::Bool},
      {"torch.ComplexFloatStorage", c10::ScalarType::ComplexFloat},
      {"torch.ComplexDoubleStorage", c10::ScalarType::ComplexDouble},
  };
  return classes;
}

// The functions a state_dict's pickle calls. Anything else is refused before it is called.
const char* const kOrderedDict = "collections.OrderedDict";
const char* const kRebuildTensorV2 = "torch._utils._rebuild_tensor_v2";
const char* const kRebuildTensor = "torch._utils._rebuild_tensor";
const char* const kRebuildParameter = "torch._utils._rebuild_parameter";
const char* const kRebuildParameterWithState = "torch._utils._rebuild_parameter_with_state";

class PickleReader {
 public:
  PickleReader(const std::string& pickle, caffe2::serialize::PyTorchStreamReader& archive, const std::string& what)
      : data_(pickle), archive_(archive), what_(what) {}

  Value run() {
    while (true) {
      const uint8_t op = byte();
      switch (op) {
        case 0x80: byte(); break;                          // PROTO
        case 0x95: little_endian(8); break;                // FRAME (protocol 4): a size hint
        case '.': return pop();                            // STOP
        case '(': marks_.push_back(stack_.size()); break;  // MARK
        case '0': pop(); break;                            // POP
        case '1': pop_to_mark(); break;                    // POP_MARK
        case '2': push(top()); break;                      // DUP
        case 'N': push(make(PickleValue::Kind::kNone)); break;
        case 0x88: push(boolean(true)); break;                                                          // NEWTRUE
        case 0x89: push(boolean(false)); break;                                                         // NEWFALSE
        case 'K': push(integer(static_cast<int64_t>(little_endian(1)))); break;                         // BININT1
        case 'M': push(integer(static_cast<int64_t>(little_endian(2)))); break;                         // BININT2
        case 'J': push(integer(static_cast<int32_t>(static_cast<uint32_t>(little_endian(4))))); break;  // BININT
        case 0x8a: push(integer(long1())); break;                                                       // LONG1
        case 'G': push(real()); break;                                                                  // BINFLOAT
        case 'X': push(string(bytes(little_endian(4)))); break;                                         // BINUNICODE
        case 0x8c: push(string(bytes(little_endian(1)))); break;  // SHORT_BINUNICODE
        case 0x8d: push(string(bytes(little_endian(8)))); break;  // BINUNICODE8
        case ')': push(make(PickleValue::Kind::kTuple)); break;   // EMPTY_TUPLE
        case 't': push(tuple(pop_to_mark())); break;              // TUPLE
        case 0x85: push(tuple(pop_n(1))); break;                  // TUPLE1
        case 0x86: push(tuple(pop_n(2))); break;                  // TUPLE2
        case 0x87: push(tuple(pop_n(3))); break;                  // TUPLE3
        case ']': push(make(PickleValue::Kind::kList)); break;    // EMPTY_LIST
        case 'a': append(pop_n(1)); break;                        // APPEND
        case 'e': append(pop_to_mark()); break;                   // APPENDS
        case '}': push(make(PickleValue::Kind::kDict)); break;    // EMPTY_DICT
        case 's': set_items(pop_n(2)); break;                     // SETITEM
        case 'u': set_items(pop_to_mark()); break;                // SETITEMS
        case 'q': memo_[little_endian(1)] = top(); break;         // BINPUT
        case 'r': memo_[little_endian(4)] = top(); break;         // LONG_BINPUT
        case 0x94: memo_[memo_.size()] = top(); break;            // MEMOIZE
        case 'h': push(memo(little_endian(1))); break;            // BINGET
        case 'j': push(memo(little_endian(4))); break;            // LONG_BINGET
        case 'c': {                                               // GLOBAL
          std::string module = line();
          push(global(module + "." + line()));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          auto args = pop_n(2);
          if (args[0]->kind != PickleValue::Kind::kString || args[1]->kind != PickleValue::Kind::kString)
            fail("names a class by something other than two strings");
          push(global(args[0]->text + "." + args[1]->text));
          break;
        }
        case 'Q': push(persistent_load(pop())); break;  // BINPERSID
        case 'R': {                                     // REDUCE
          auto args = pop();
          auto callable = pop();
          push(call(*callable, *args));
          break;
        }
        case 'b': {  // BUILD
          pop();     // the state
          // state_dict()'s OrderedDict carries `_metadata` (per-module versions for old formats):
          // not weights, and nothing here needs it.
          if (top()->kind != PickleValue::Kind::kDict) fail("sets the state of " + describe(*top()));
          break;
        }
        case 0x81:  // NEWOBJ
        case 0x92:  // NEWOBJ_EX
        case 'o':   // OBJ
        case 'i':   // INST
          fail("builds an instance of a Python class, not a state_dict");
        default: {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op);
          fail(std::string("uses pickle opcode ") + hex + ", which no state_dict needs");
        }
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw Error(what_ + " is not a state_dict that torch.save wrote: its pickle " + why, kSaveHint);
  }

  uint8_t byte() {
    if (pos_ >= data_.size()) fail("ends early (the file is damaged)");
    return static_cast<uint8_t>(data_[pos_++]);
  }
  uint64_t little_endian(size_t n) {
    uint64_t value = 0;
    for (size_t i = 0; i < n; ++i) value |= static_cast<uint64_t>(byte()) << (8 * i);
    return value;
  }
  std::string bytes(uint64_t n) {
    if (n > data_.size() - pos_) fail("ends early (the file is damaged)");
    std::string s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::string line() {
    const auto end = data_.find('\n', pos_);
    if (end == std::string::npos) fail("ends early (the file is damaged)");
    std::string s = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  int64_t long1() {  // n bytes, little-endian two's complement
    const uint64_t n = little_endian(1);
    if (n > 8) fail("holds an integer wider than 64 bits");
    if (n == 0) return 0;
    uint64_t value = little_endian(n);
    if (n < 8 && (value >> (8 * n - 1)) & 1) value |= ~uint64_t{0} << (8 * n);  // sign-extend
    return static_cast<int64_t>(value);
  }
  Value real() {
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits = (bits << 8) | byte();  // big-endian
    auto v = make(PickleValue::Kind::kFloat);
    std::memcpy(&v->real, &bits, sizeof bits);
    return v;
  }

  static Value boolean(bool b) {
    auto v = make(PickleValue::Kind::kBool);
    v->integer = b;
    return v;
  }
  static Value integer(int64_t i) {
    auto v = make(PickleValue::Kind::kInt);
    v->integer = i;
    return v;
  }
  static Value string(std::string s) {
    auto v = make(PickleValue::Kind::kString);
    v->text = std::move(s);
    return v;
  }
  static Value tuple(std::vector<Value> items) {
    auto v = make(PickleValue::Kind::kTuple);
    v->items = std::move(items);
    return v;
  }

  void push(Value v) { stack_.push_back(std::move(v)); }
  const Value& top() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail("is malformed (its stack runs empty)");
    return stack_.back();
  }
  Value pop() {
    Value v = top();
    stack_.pop_back();
    return v;
  }
  std::vector<Value> pop_n(size_t n) {
    std::vector<Value> items(n);
    for (size_t i = n; i-- > 0;) items[i] = pop();
    return items;
  }
  std::vector<Value> pop_to_mark() {
    if (marks_.empty()) fail("is malformed (a MARK is missing)");
    std::vector<Value> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  Value memo(uint64_t key) {
    const auto it = memo_.find(key);
    if (it == memo_.end()) fail("is malformed (it refers to memo entry " + std::to_string(key) + ", never stored)");
    return it->second;
  }

  void append(const std::vector<Value>& items) {
    const Value& list = top();
    if (list->kind != PickleValue::Kind::kList) fail("appends to " + describe(*list));
    list->items.insert(list->items.end(), items.begin(), items.end());
  }
  void set_items(const std::vector<Value>& items) {
    if (items.size() % 2 != 0) fail("is malformed (a key without a value)");
    const Value& dict = top();
    if (dict->kind != PickleValue::Kind::kDict) fail("sets items of " + describe(*dict));
    for (size_t i = 0; i < items.size(); i += 2) dict->entries.emplace_back(items[i], items[i + 1]);
  }

  Value global(const std::string& name) {
    static const std::vector<std::string> functions = {kOrderedDict, kRebuildTensorV2, kRebuildTensor,
                                                       kRebuildParameter, kRebuildParameterWithState};
    auto v = make(PickleValue::Kind::kGlobal);
    v->text = name;
    const auto storage = storage_classes().find(name);
    if (storage != storage_classes().end()) {
      v->dtype = storage->second;
      return v;
    }
    for (const auto& f : functions)
      if (name == f) return v;
    fail("holds the Python object " + name + ", which a state_dict (a dict of tensors) never holds");
  }

  // ('storage', torch.FloatStorage, key, location, numel): the record data/<key>, read onto the CPU.
  Value persistent_load(const Value& id) {
    const auto& f = id->items;
    if (id->kind != PickleValue::Kind::kTuple || f.size() != 5 || f[0]->kind != PickleValue::Kind::kString ||
        f[0]->text != "storage" || f[1]->kind != PickleValue::Kind::kGlobal ||
        f[1]->dtype == c10::ScalarType::Undefined || f[2]->kind != PickleValue::Kind::kString ||
        f[4]->kind != PickleValue::Kind::kInt || f[4]->integer < 0)
      fail("refers to external data that is not a tensor storage");
    auto& storage = storages_[f[2]->text];
    if (!storage.defined()) {
      const std::string record = "data/" + f[2]->text;
      const auto element = static_cast<int64_t>(c10::elementSize(f[1]->dtype));
      if (!archive_.hasRecord(record)) fail("refers to storage " + record + ", which the archive lacks");
      const auto [bytes, size] = archive_.getRecord(record);
      const auto record_bytes = static_cast<int64_t>(size);
      if (record_bytes != f[4]->integer * element)
        fail("says storage " + record + " holds " + std::to_string(f[4]->integer * element) + " bytes; it holds " +
             std::to_string(record_bytes));
      storage = torch::empty({f[4]->integer}, torch::TensorOptions().dtype(f[1]->dtype));
      if (size > 0) std::memcpy(storage.data_ptr(), bytes.get(), size);
    }
    auto v = make(PickleValue::Kind::kStorage);
    v->tensor = storage;
    return v;
  }

  std::vector<int64_t> ints(const PickleValue& tuple, const std::string& what) {
    if (tuple.kind != PickleValue::Kind::kTuple) fail("gives a tensor's " + what + " as " + describe(tuple));
    std::vector<int64_t> out;
    for (const auto& item : tuple.items) {
      if (item->kind != PickleValue::Kind::kInt) fail("gives a tensor's " + what + " with " + describe(*item));
      out.push_back(item->integer);
    }
    return out;
  }

  // The tensor (storage, offset, size, stride) describes, copied out of the storage.
  Value rebuild_tensor(const std::vector<Value>& args) {
    if (args.size() < 4 || args[0]->kind != PickleValue::Kind::kStorage || args[1]->kind != PickleValue::Kind::kInt)
      fail("rebuilds a tensor from something other than a storage");
    const auto& storage = args[0]->tensor;
    const int64_t offset = args[1]->integer;
    const auto size = ints(*args[2], "size"), stride = ints(*args[3], "stride");
    if (size.size() != stride.size()) fail("gives a tensor a size and a stride of different lengths");
    int64_t last = offset;  // the last element the view touches
    bool empty = false;
    for (size_t d = 0; d < size.size(); ++d) {
      if (size[d] < 0 || stride[d] < 0) fail("gives a tensor a negative size or stride");
      if (size[d] == 0)
        empty = true;
      else
        last += (size[d] - 1) * stride[d];
    }
    if (offset < 0 || (!empty && last >= storage.numel()))
      fail("describes a tensor beyond the end of its storage (the file is damaged)");
    auto v = make(PickleValue::Kind::kTensor);
    v->tensor = empty ? torch::empty(size, storage.options())
                      : storage.as_strided(size, stride, offset).clone(at::MemoryFormat::Contiguous);
    return v;
  }

  Value call(const PickleValue& callable, const PickleValue& args) {
    if (callable.kind != PickleValue::Kind::kGlobal || args.kind != PickleValue::Kind::kTuple)
      fail("calls " + describe(callable) + ", not a function");
    const std::string& f = callable.text;
    if (f == kOrderedDict) {
      if (!args.items.empty()) fail("builds an OrderedDict from arguments");
      return make(PickleValue::Kind::kDict);
    }
    if (f == kRebuildTensorV2 || f == kRebuildTensor) return rebuild_tensor(args.items);
    if (f == kRebuildParameter || f == kRebuildParameterWithState) {  // nn.Parameter(data): the data
      if (args.items.empty() || args.items[0]->kind != PickleValue::Kind::kTensor)
        fail("rebuilds a Parameter from something other than a tensor");
      return args.items[0];
    }
    fail("calls " + f + ", which builds no tensor");  // a storage class called like a function
  }

  const std::string& data_;
  caffe2::serialize::PyTorchStreamReader& archive_;
  const std::string& what_;
  size_t pos_ = 0;
  std::vector<Value> stack_;
  std::vector<size_t> marks_;  // stack heights at each MARK
  std::unordered_map<uint64_t, Value> memo_;
  std::map<std::string, torch::Tensor> storages_;  // shared by the tensors that view them
};

// c10::Error's first line: the message without LibTorch's source location and backtrace.
std::string first_line(const c10::Error& e) {
  std::string s = e.what_without_backtrace();
  return s.substr(0, s.find('\n'));
}

}  // namespace

std::string tensor_dict_to_bytes(const TensorDict& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : tensors) {
    // A copy of its own: a view would save its whole storage, a CUDA tensor its device.
    const bool added = dict.insert(name, tensor.detach().to(torch::kCPU).clone(at::MemoryFormat::Contiguous)).second;
    DDP_CHECK(added, "two tensors are both named '" + name + "'", "give every tensor of the state_dict its own name");
  }
  std::string pickle;
  torch::jit::Pickler pickler([&](const char* data, size_t n) { pickle.append(data, n); }, /*tensor_table=*/nullptr,
                              /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr, /*get_tensor_id=*/nullptr,
                              /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();

  std::string archive;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) {
    archive.append(static_cast<const char*>(data), n);
    return n;
  });
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  const auto& storages = pickler.tensorData();  // in the order the pickle numbers them: data/0, data/1, ...
  for (size_t i = 0; i < storages.size(); ++i) {
    const auto bytes = torch::jit::getWriteableTensorData(storages[i]);
    writer.writeRecord("data/" + std::to_string(i), bytes.data(), bytes.sizeInBytes());
  }
  writer.writeEndOfFile();
  return archive;
}

TensorDict tensor_dict_from_bytes(const std::string& bytes, const std::string& what) {
  if (bytes.empty()) throw Error(what + " is empty", kSaveHint);
  if (bytes.rfind("PK\x03\x04", 0) != 0) {
    if (static_cast<uint8_t>(bytes[0]) == 0x80)  // a pickle's PROTO opcode: pickle.dump, or torch.save's pre-1.6 format
      throw Error(what + " is a plain Python pickle, not the zip archive torch.save writes",
                  std::string(kSaveHint) + " (not pickle.dump, nor _use_new_zipfile_serialization=False)");
    throw Error(what + " is not a file torch.save wrote (it does not start like a zip archive)", kSaveHint);
  }
  std::istringstream stream(bytes);
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> archive;
  std::string pickle;
  try {
    archive = std::make_unique<caffe2::serialize::PyTorchStreamReader>(&stream);
    if (!archive->hasRecord("data.pkl"))
      throw Error(what + " is a zip archive without data.pkl: not a file torch.save wrote", kSaveHint);
    if (archive->hasRecord("byteorder")) {
      const auto [order, n] = archive->getRecord("byteorder");
      if (std::string(static_cast<const char*>(order.get()), n) != "little")
        throw Error(what + " holds big-endian tensors", "save it on a little-endian machine (x86, ARM)");
    }
    const auto [data, n] = archive->getRecord("data.pkl");
    pickle.assign(static_cast<const char*>(data.get()), n);
  } catch (const c10::Error& e) {
    throw Error(what + " is truncated or damaged: it is not a readable zip archive (" + first_line(e) + ")",
                "write it again: " + std::string(kSaveHint));
  }
  Value root;
  try {
    root = PickleReader(pickle, *archive, what).run();
  } catch (const c10::Error& e) {
    throw Error(what + " is truncated or damaged: " + first_line(e), "write it again: " + std::string(kSaveHint));
  }
  if (root->kind != PickleValue::Kind::kDict)
    throw Error(what + " holds " + describe(*root) + ", not a state_dict (a dict of name -> tensor)", kSaveHint);
  TensorDict out;
  for (const auto& [key, value] : root->entries) {
    if (key->kind != PickleValue::Kind::kString)
      throw Error(what + " holds a dict whose keys are not all names (one is " + describe(*key) + ")", kSaveHint);
    if (value->kind != PickleValue::Kind::kTensor)
      throw Error(what + " holds '" + key->text + "': " + describe(*value) + ", not a tensor",
                  value->kind == PickleValue::Kind::kDict
                      ? "a checkpoint of several things? save the model's part alone: torch.save(checkpoint['" +
                            key->text + "'], path), or " + kSaveHint
                      : std::string(kSaveHint));
    out.emplace_back(key->text, value->tensor);
  }
  return out;
}

}  // namespace ddp
