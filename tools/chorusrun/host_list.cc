// Parsing -H host lists and hostfiles (see host_list.h).
#include "host_list.h"

#include <charconv>
#include <fstream>
#include <sstream>

#include "chorus/error.h"

namespace chorus::launcher {
namespace {

std::string_view trim(std::string_view text) {
  size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string_view::npos) {
    return {};
  }
  return text.substr(begin, text.find_last_not_of(" \t\r") - begin + 1);
}

int parseSlots(std::string_view text, const std::string& where) {
  int slots = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), slots);
  if (error != std::errc() || end != text.data() + text.size() || slots < 1 || slots > 65536) {
    throw InvalidArgumentError(where + ": slots must be a whole number from 1 to 65536, not '" +
                               std::string(text) + "'");
  }
  return slots;
}

void checkHost(std::string_view host, const std::string& where) {
  if (host.empty() || host.find_first_of(" \t,=") != std::string_view::npos) {
    throw InvalidArgumentError(where + ": '" + std::string(host) + "' is not a host name");
  }
}

// "host" or "host:slots".
HostSlots parseColonEntry(std::string_view entry, const std::string& where) {
  HostSlots result;
  size_t colon = entry.rfind(':');
  std::string_view host = colon == std::string_view::npos ? entry : entry.substr(0, colon);
  checkHost(host, where);
  result.host = std::string(host);
  if (colon != std::string_view::npos) {
    result.slots = parseSlots(entry.substr(colon + 1), where);
  }
  return result;
}

// "node1 slots=4 [max_slots=8]" or "node1:4" or "node1".
HostSlots parseHostfileLine(std::string_view line, const std::string& where) {
  std::vector<std::string_view> words;
  while (!(line = trim(line)).empty()) {
    size_t end = line.find_first_of(" \t");
    words.push_back(line.substr(0, end));
    line = end == std::string_view::npos ? std::string_view() : line.substr(end);
  }
  HostSlots result = parseColonEntry(words[0], where);
  for (size_t i = 1; i < words.size(); ++i) {
    std::string_view word = words[i];
    if (word.rfind("slots=", 0) == 0 && words[0].find(':') == std::string_view::npos) {
      result.slots = parseSlots(word.substr(6), where);
    } else if (word.rfind("max_slots=", 0) != 0) {
      throw InvalidArgumentError(where + ": unexpected '" + std::string(word) +
                                 "' (write \"host slots=N\" or \"host:N\")");
    }
  }
  return result;
}

}  // namespace

std::vector<HostSlots> parseHostList(std::string_view text) {
  std::vector<HostSlots> hosts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string_view entry = trim(text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    hosts.push_back(parseColonEntry(entry, "-H entry " + std::to_string(hosts.size() + 1)));
    if (comma == std::string_view::npos) {
      break;
    }
    start = comma + 1;
  }
  return hosts;
}

std::vector<HostSlots> parseHostfile(std::string_view content) {
  std::vector<HostSlots> hosts;
  int lineNumber = 0;
  size_t start = 0;
  while (start < content.size()) {
    size_t newline = content.find('\n', start);
    std::string_view line = content.substr(
        start, newline == std::string_view::npos ? std::string_view::npos : newline - start);
    start = newline == std::string_view::npos ? content.size() : newline + 1;
    ++lineNumber;
    line = trim(line.substr(0, line.find('#')));
    if (!line.empty()) {
      hosts.push_back(parseHostfileLine(line, "hostfile line " + std::to_string(lineNumber)));
    }
  }
  if (hosts.empty()) {
    throw InvalidArgumentError("the hostfile names no host");
  }
  return hosts;
}

std::vector<HostSlots> readHostfile(const std::string& path) {
  std::ifstream file(path);
  if (!file) {
    throw InvalidArgumentError("cannot read the hostfile " + path);
  }
  std::stringstream content;
  content << file.rdbuf();
  return parseHostfile(content.str());
}

}  // namespace chorus::launcher
