// The one source of keras_precompiled_api, the target that precompiles keras.h for the
// programs built on the library (CMakeLists.txt, keras_use_precompiled_api): empty.
