// core/json_duplicates.cpp — see json_duplicates.h. A scan over text that is known to be valid
// JSON: strings, comments, and a stack of open objects and arrays with their keys' lines.
#include "core/json_duplicates.h"

#include <map>
#include <vector>

namespace moezero {

namespace {

struct Open {
  bool object = false;
  std::string path;                  // of this object or array
  std::map<std::string, int> lines;  // object: key -> line
  std::string last_key;              // object: the key whose value comes next
  int elements = 0;                  // array: index of the next element
};

std::string child_path(const Open& parent) {
  if (parent.object)
    return parent.path.empty() ? parent.last_key : parent.path + "." + parent.last_key;
  return parent.path + "[" + std::to_string(parent.elements) + "]";
}

// Index just past the string that starts (with its quote) at i.
size_t skip_string(const std::string& t, size_t i) {
  for (++i; i < t.size() && t[i] != '"'; ++i)
    if (t[i] == '\\') ++i;
  return i + 1;
}

// Index of the next character that is not white space or a comment; counts lines.
size_t skip_blank(const std::string& t, size_t i, int& line) {
  while (i < t.size()) {
    if (t[i] == '\n') {
      ++line;
      ++i;
    } else if (t[i] == ' ' || t[i] == '\t' || t[i] == '\r') {
      ++i;
    } else if (t.compare(i, 2, "//") == 0) {
      while (i < t.size() && t[i] != '\n') ++i;
    } else if (t.compare(i, 2, "/*") == 0) {
      for (i += 2; i < t.size() && t.compare(i, 2, "*/") != 0; ++i)
        if (t[i] == '\n') ++line;
      i += 2;
    } else {
      break;
    }
  }
  return i;
}

}  // namespace

std::optional<DuplicateKey> find_duplicate_key(const std::string& t) {
  std::vector<Open> stack;
  int line = 1;
  for (size_t i = skip_blank(t, 0, line); i < t.size(); i = skip_blank(t, i, line)) {
    const char c = t[i];
    if (c == '{' || c == '[') {
      Open o;
      o.object = c == '{';
      if (!stack.empty()) o.path = child_path(stack.back());
      stack.push_back(std::move(o));
      ++i;
    } else if (c == '}' || c == ']') {
      if (!stack.empty()) stack.pop_back();
      ++i;
    } else if (c == ',') {
      if (!stack.empty() && !stack.back().object) ++stack.back().elements;
      ++i;
    } else if (c == '"') {
      const size_t end = skip_string(t, i);
      const int at = line;
      int after = line;
      const size_t next = skip_blank(t, end, after);
      if (!stack.empty() && stack.back().object && next < t.size() && t[next] == ':') {
        line = after;
        Open& o = stack.back();
        o.last_key = t.substr(i + 1, end - i - 2);
        if (auto [it, fresh] = o.lines.emplace(o.last_key, at); !fresh)
          return DuplicateKey{child_path(o), it->second, at};
        i = next + 1;
      } else {
        i = end;
      }
    } else {
      ++i;  // a number, true, false, null or ':'
    }
  }
  return std::nullopt;
}

}  // namespace moezero
