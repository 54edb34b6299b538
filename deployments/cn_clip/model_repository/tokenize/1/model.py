"""cn_clip tokenization: TEXT (UTF-8) -> INPUT_IDS [52] INT64, identical to cn_clip.clip.tokenize."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils
from cn_clip_tokenizer import CnClipTokenizer  # beside this file (the stub puts 1/ on sys.path)

from triton_helpers.config import parameter
from triton_helpers.errors import respond_each, utf8_texts


class TritonPythonModel:
    """Runs cn_clip's own vocabulary and WordPiece tokenizer (loaded without torch)."""

    def initialize(self, args):
        """Read the output dtype and parameters; load the tokenizer."""
        config = json.loads(args["model_config"])
        self.dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, "INPUT_IDS")["data_type"]
        )
        self.tokenizer = CnClipTokenizer(parameter(config, "context_length", 52, int))
        self.max_bytes = parameter(config, "max_text_bytes", 16384, int)
        self.reject_empty = parameter(config, "reject_empty", "true").lower() in ("1", "true", "yes")

    def execute(self, requests):
        """One response per request; a bad text gets a 400 for its own request only."""
        return respond_each(pb_utils, requests, self.answer)

    def answer(self, request):
        """The token ids of each text of one request."""
        # Sizes are checked on the raw bytes, before a 1 MB text is decoded or tokenized.
        texts = utf8_texts(pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy(), "TEXT", self.max_bytes)
        ids = self.tokenizer.encode_checked(texts, "TEXT", max_bytes=self.max_bytes, reject_empty=self.reject_empty)
        out = pb_utils.Tensor("INPUT_IDS", np.ascontiguousarray(ids, dtype=self.dtype))
        return pb_utils.InferenceResponse(output_tensors=[out])

    def finalize(self):
        """Nothing to release."""
