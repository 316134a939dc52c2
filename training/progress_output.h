// Where progress output goes and what it should look like there: verbose="auto" gives a
// progress bar on an interactive terminal and one line per epoch otherwise (tf.keras 2 chose by
// where output goes; Keras 3 maps "auto" to the bar everywhere), made to hold under mpirun too.
//
// The rule. Output reaches a terminal when the stream is one (isatty) — except under mpirun,
// which gives every rank a pseudo-terminal even when the user sent mpirun's own output to a
// file or a pipe (checked: OpenMPI 4.1, `mpirun -np 1 prog > log` gives the rank /dev/pts/0).
// There the question is asked of mpirun itself: the rank's parent process is mpirun on
// mpirun's own machine, and its standard output (/proc/<parent>/fd/1) is a terminal or not.
// A rank whose parent is a remote daemon (orted, prted), or whose parent cannot be read, counts
// as not on a terminal: a log without escape codes is the safe side.
//
// The flag. KERAS_PROGRESS=bar|lines|auto overrides the rule: "bar" draws the bar wherever
// the output goes, "lines" prints one line per epoch (and makes verbose=1 print only each
// epoch's finished line), "auto" (or unset) applies the rule.
#pragma once
#include <cstdio>
#include <string>

namespace keras {

// Keras' verbose argument: "auto", 0 (silent), 1 (progress bar), 2 (one line per epoch).
class Verbose {
 public:
  Verbose(int level);  // NOLINT(google-explicit-constructor): reads as Keras' verbose=1
  Verbose(const char* word);  // NOLINT(google-explicit-constructor): verbose="auto"
  Verbose(const std::string& word);  // NOLINT(google-explicit-constructor)
  bool automatic() const { return level_ < 0; }
  // The level for output to `stream`: "auto" resolved by the rule above (1 on a terminal, 2
  // otherwise), an explicit level as given.
  int resolve(std::FILE* stream = stdout) const;

 private:
  int level_;  // -1: "auto"
};

// Whether output written to `stream` is seen on an interactive terminal (the rule above,
// KERAS_PROGRESS included). Throws ValueError for a KERAS_PROGRESS it does not know.
bool progress_reaches_terminal(std::FILE* stream);

}  // namespace keras
