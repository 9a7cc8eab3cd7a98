// llmtrain: train or evaluate a model. parse -> Runtime -> Trainer -> run.
#include <iostream>

#include "llmtrain/core/config.hpp"
#include "llmtrain/dist/runtime.hpp"

int main(int argc, char** argv) {
  return llmtrain::run_main(argc, argv, [&](llmtrain::Runtime& rt) {
    const auto cl = llmtrain::parse_command_line(argc, argv);
    if (cl.help) {
      if (rt.is_root())
        std::cout << "usage: llmtrain [config.cfg ...] [--key=value ...] [--describe] [--print_config]\n"
                  << llmtrain::Config::help_text();
      return 0;
    }
    cl.config.validate();
    return 0;
  });
}
