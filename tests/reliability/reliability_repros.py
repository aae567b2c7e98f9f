"""Models that reproduce known bugs of other components' passes (ONNX text format).

Each is parsed with ``onnx.parser.parse_model``; see docs/reliability.md, "Known bugs", and the
strict xfails in test_reliability_regressions.py.
"""

#: A fuzz example (test_reliability_fuzz.py) on which ``reorder`` moves both Constant nodes
#: after their consumers.
REORDER_CONSTANTS = """
<
   ir_version: 8,
   opset_import: ["" : 18]
>
fuzz (float[2,4,5,2] x, bool cond) => (float[3] matmul19, float[2,5,2,4] add3)
   <int64[1] i4 =  {-1}, float[80,3] w18 =  {0.06045078,0.049749188,-0.14872506,0.053498175,-0.028301781,-0.111431465,-0.047501378,-0.035321597,-0.16746339,-0.07947964,0.16833743,-0.038798325,-0.08397178,0.036198866,0.049074147,0.01384641,0.03043731,-0.0804281,0.07055087,0.033649378,0.13107762,0.0029635702,-0.04980408,0.041940846,0.29626057,-0.0858137,0.051505465,0.023282839,0.21010885,-0.18497048,0.102137335,-0.00817904,0.22338538,0.12273794,0.041740455,0.059681464,-0.11078749,-0.29333812,-0.05853587,-0.02642276,-0.231717,-0.0564576,-0.0067851245,-0.17214787,-0.08840675,-0.11208374,-0.028373618,-0.12491154,-0.084262446,-0.20580213,0.052215703,-0.077885516,0.17549942,-0.025959982,-0.19651313,0.07245001,0.048718847,-0.2500993,0.2793157,-0.14125617,0.17074265,-0.024741147,0.014523003,-0.031241266,-0.12553789,0.11297399,-0.12120949,-0.098602295,-0.09912595,0.04662124,-0.09765703,-0.054172013,0.19429804,-0.15693581,0.15226199,0.021038966,0.13968058,-0.011192408,-0.0146020325,-0.06222134,0.07331006,-0.123728625,-0.095632054,0.11291352,0.07955618,0.13109024,-0.033881128,-0.007897029,-0.075875044,-0.08904217,-0.0315603,-0.06298954,0.16054499,0.21938115,-0.029873444,-0.11161097,-0.11111873,-0.22124353,0.045888014,0.050907094,0.16139282,-0.07972059,0.016530726,-0.0049731643,0.20583642,-0.09043311,-0.04524654,-0.22300218,0.023868153,0.022550648,-0.088705204,0.04782934,-0.017596902,-0.16794346,-0.07269732,0.09725479,0.0008024354,-0.07167358,-0.015485619,0.1961497,-0.080957666,0.0076318206,0.08500637,0.07328782,-0.10593703,-0.22762077,0.058864444,-0.046973146,-0.14654765,0.014174338,-0.07504855,-0.0820582,0.11421703,0.0003966647,-0.09305682,0.093819715,-0.14721957,-0.15958361,0.05821978,-0.013067912,-0.021667803,0.20724781,-0.24924055,-0.010194429,-0.016433794,-0.13795437,-0.19238536,0.060529713,0.033069625,0.09378935,-0.17265783,-0.16917582,-0.09224866,-0.08369196,0.15977922,0.14704375,-0.06917725,-0.13434339,0.020069353,-0.04157416,-0.043464344,0.047099855,0.20672826,0.03392465,0.13489753,-0.08512935,-0.0185326,-0.039042,0.04079924,0.033000637,0.017026624,-0.2474914,-0.11010569,0.089939125,0.04443723,0.046258032,0.023279049,0.17904681,0.009255025,-0.02510931,-0.15695773,0.038075827,-0.025864067,0.209374,-0.12303608,-0.017539287,-0.12816186,-0.009498235,0.09577475,0.041549888,0.101423815,0.061831422,0.024339797,0.059109546,0.08582348,-0.0045019574,0.0067461818,-0.07781534,0.090795025,-0.041474015,-0.10871919,-0.039354395,-0.27141488,0.16421579,0.15222405,-0.034032755,0.09133742,0.064803824,-0.15213282,0.08004742,-0.04884051,-0.009427858,0.013185291,-0.06460723,0.045291964,0.16816722,-0.06753076,-0.08529799,0.0488968,0.016116412,0.15259232,0.15050103,0.03375486,0.10786246,0.04673222,0.16561073,-0.03691346,-0.08103554,0.049374625,0.13443626,-0.066506475,-0.029679967,0.107846245,-0.18928778,0.039456103,-0.0060444553,0.10402285,-0.06992108,0.051114537,-0.005896699}>
{
   transpose1 = Transpose <perm: ints = [0, 2, 3, 1]> (x)
   const2 = Constant <value: tensor = float[2,5,2,4] {0.56716484,-0.5106316,-1.5353631,-1.5743802,-0.2910279,-0.5896843,0.8546709,0.26733905,1.3726572,0.22851522,0.7191293,0.121669315,-0.30417734,0.021900449,-1.2970568,0.006731241,0.8732831,0.40874076,-1.2062494,-0.6129296,-0.69994855,-0.074097626,-0.39802742,0.45415854,-0.17122738,-1.4219526,-0.7500453,-0.88105345,0.22933589,-1.7818496,0.70604926,-1.3957502,0.6090265,-0.06151502,-1.3933384,-2.0718815,0.76158684,-0.9725714,2.9826655,-0.8672954,-0.46836236,0.014058115,-0.10274414,0.033529658,-0.20162265,-0.3116263,-0.5604511,1.9261823,0.33824888,1.4188782,1.0757465,-1.4343393,0.66719633,-1.4485239,-0.601024,1.5592009,0.0031461772,-0.6237163,0.97142375,-0.41648528,-0.098311745,0.2672976,1.2462869,0.7073637,0.64847046,-0.23885675,-0.32825893,-0.48092568,-0.2372573,0.8784234,-1.2424551,-0.7424184,1.0389231,1.4824473,-0.2016832,-0.20261803,0.5103054,1.3114139,0.16084203,0.30894658}> ()
   add3 = Add (transpose1, const2)
   reshape5 = Reshape (x, i4)
   abs6 = Abs (add3)
   const7 = Constant <value: tensor = float[80] {-0.04330314,1.8742139,0.6223522,-0.66412544,1.0566394,-0.6053801,0.32921866,-0.7842156,-0.3905503,-0.77643645,-0.21856853,-0.49316967,-1.500445,1.1188741,0.3785667,2.2989554,0.2701432,-0.743077,-0.28032663,0.347344,0.019854644,1.1832072,-0.5154442,-0.032031894,1.1983613,1.2002487,-2.0396006,1.9697474,-0.08474807,-0.35213485,-0.0055717137,0.5132385,0.08351206,-0.124100894,1.3862857,-1.1604533,0.45083454,0.88557404,0.9687383,-0.5116639,1.3558211,1.1844141,1.723309,-0.32071707,0.074236915,0.29747462,0.3655125,0.48307326,-0.6315514,-1.4092864,-0.26669815,0.4416454,0.11668607,1.5013101,0.02452241,1.614936,-1.4543185,-0.6227357,0.34996864,-1.027292,0.0029941585,0.90810436,-0.91025174,-2.2373776,0.45809746,-0.21904816,1.5308834,0.48057228,0.42754617,0.353701,0.11361951,0.32841286,-1.8654138,-1.1848878,-0.32317856,0.14008324,-0.3367642,1.2792686,-1.6670076,0.022620346}> ()
   add8 = Add (reshape5, const7)
   if9 = If (cond) <else_branch: graph = else17 () => (float[80] else16)
      <float[80] else14 =  {0.35787025,-0.011791497,0.84240556,0.9272619,-1.59446,0.7012787,1.9802524,0.6646683,-0.29022676,-0.09310849,-0.14762472,0.35928032,-0.3980771,-0.13337404,0.3016881,0.5512603,0.3448611,0.49349084,-1.8771387,-1.6160235,1.2473814,-1.1015736,1.8745089,-0.1092085,-0.6876427,-0.48998246,-0.64404887,-0.5597557,0.030259814,0.12103456,0.59065676,0.5448065,-0.44598046,0.815676,-0.07023711,0.14596893,-0.28528082,0.3619205,0.877945,-1.0302745,-1.388857,-1.9146028,0.38429582,0.5734302,-0.2388114,-0.893277,-0.6026192,0.3108322,-0.47517854,-0.39880988,-0.6574217,-1.0705743,1.1596054,1.545281,2.1160693,1.2720135,0.3807069,-0.32305458,0.88560224,-0.65341425,0.24047905,0.2110302,0.6090799,0.64967805,-1.098947,-1.3803029,0.09215289,-0.025565462,0.63646036,0.7785344,-0.72982454,-0.7804825,0.73711693,-1.9629654,0.15216623,0.12844656,-0.31041852,0.5518413,2.213195,1.0227516}>
{
      else15 = Sigmoid (add8)
      else16 = Mul (else15, else14)
   }, then_branch: graph = then13 () => (float[80] then12)
      <float[80] then10 =  {-1.0067647,-0.974351,1.3224936,-1.1325885,-0.7077087,-0.2850245,0.022381715,-0.24603768,-1.5136881,-0.32840168,-3.0169203,-1.3877017,-1.6025349,-0.9713265,0.46942386,1.1763568,1.4871871,0.31144652,2.0683315,-0.14964136,0.8535163,0.31426167,-0.29617658,2.1787255,0.24221364,-0.9696651,1.3329823,-0.59716797,0.92121154,-0.86582756,-1.7249372,-0.27090904,-0.7211065,0.64674383,0.774327,0.5404864,-0.59610265,-0.2671052,1.4101404,0.13646048,0.17939644,2.2010152,-1.5704135,-1.4823622,0.09397854,1.1754467,-0.69145185,-0.11393831,-1.0947846,-0.9204698,0.6636464,0.37402382,0.34720093,1.1947318,-0.72202563,0.62872565,0.4014114,-0.38654274,-0.11829675,-0.28655586,-0.10303415,1.871563,0.16808328,-1.4396048,-1.5478693,0.16905026,0.83656055,0.037724476,-0.49847567,0.79615724,1.732804,0.23420824,-2.154273,-0.7448201,-0.13325493,-0.42482316,0.7914153,-0.20389767,-1.6898915,0.042520426}>
{
      then11 = Relu (add8)
      then12 = Add (then11, then10)
   }>
   matmul19 = MatMul (add8, w18)
}"""

#: ONNX suite case ``test_attention_4d_attn_mask_bool_4d_expanded`` (Attention expanded into
#: its function body): ``all`` fails in ``chunk`` (clone_graph) after the earlier passes.
ATTENTION_EXPANDED = """
<
   ir_version: 11,
   opset_import: ["" : 23],
   producer_name: "backend-test"
>
test_attention_4d_attn_mask_bool_4d_expanded (float[2,3,4,8] Q, float[2,3,6,8] K, float[2,3,6,8] V, bool[2,3,4,6] attn_mask) => (float[2,3,4,8] Y) {
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_BatchSize = Shape <start: int = 0, end: int = 1> (Q)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QSeqLen = Shape <start: int = -2, end: int = -1> (Q)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KVSeqLen = Shape <start: int = -2, end: int = -1> (K)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QReshaped = Identity (Q)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KReshaped = Identity (K)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_VReshaped = Identity (V)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QNumHeads = Shape <start: int = 1, end: int = 2> (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QReshaped)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KVNumHeads = Shape <start: int = 1, end: int = 2> (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KReshaped)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QKHeadSize = Shape <start: int = 3, end: int = 4> (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QReshaped)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QKHeadSizeF = Cast <to: int = 1> (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QKHeadSize)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_VHeadSize = Shape <start: int = 3, end: int = 4> (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_VReshaped)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_SqrtHeadSize = Sqrt (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QKHeadSizeF)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_One1D = Constant <value: tensor = int64[1] {1}> ()
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_One1DF = Constant <value: tensor = float[1] {1}> ()
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_Zero1D = Constant <value: tensor = int64[1] {0}> ()
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_CalculatedScale = Div (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_One1DF, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_SqrtHeadSize)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_ScaleF = Constant <value: tensor = float {1}> ()
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_ScaleFactor = Identity (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_CalculatedScale)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_ScaleFactorSqrt = Sqrt (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_ScaleFactor)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_ScaleFactorF = Cast <to: int = 1> (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_ScaleFactorSqrt)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_PresentKey = Identity (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KReshaped)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_PastKVSeqLen = Constant <value: tensor = int64[1] {0}> ()
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_PresentValue = Identity (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_VReshaped)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_NewKVSeqLen = Shape <start: int = -2, end: int = -1> (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_PresentKey)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_AttnBiasShape = Concat <axis: int = 0> (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QSeqLen, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_NewKVSeqLen)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_FloatNegInf = Constant <value: tensor = float[1] {-inf}> ()
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_ScalarZero = Constant <value: tensor = float[1] {0}> ()
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_AttnBiasShort = Where (attn_mask, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_ScalarZero, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_FloatNegInf)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_AttnBias = Identity (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_AttnBiasShort)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_AttnBiasCausalOrNot = Identity (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_AttnBias)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_AttnBiasT = Cast <to: int = 1> (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_AttnBiasCausalOrNot)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_NGQACond1 = Equal (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QNumHeads, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KVNumHeads)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_GQACond1 = Not (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_NGQACond1)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_DivNumHeads = Div (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QNumHeads, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KVNumHeads)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_IDivNumHeads = Cast <to: int = 7> (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_DivNumHeads)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_RemainderNumHeads = Mod (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QNumHeads, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KVNumHeads)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_GQACond2 = Equal (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_RemainderNumHeads, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_Zero1D)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_GQACond = And (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_GQACond1, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_GQACond2)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_InterleaveDim = Where (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_GQACond, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_IDivNumHeads, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_One1D)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_Two1D = Constant <value: tensor = int64[1] {2}> ()
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KUnsqueezed = Unsqueeze (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_PresentKey, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_Two1D)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_VUnsqueezed = Unsqueeze (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_PresentValue, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_Two1D)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KExpandShape = Concat <axis: int = 0> (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_BatchSize, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KVNumHeads, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_InterleaveDim, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_NewKVSeqLen, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QKHeadSize)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KExpanded = Expand (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KUnsqueezed, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KExpandShape)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_VExpandShape = Concat <axis: int = 0> (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_BatchSize, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KVNumHeads, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_InterleaveDim, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_NewKVSeqLen, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_VHeadSize)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_VExpanded = Expand (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_VUnsqueezed, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_VExpandShape)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KAttentionShape = Concat <axis: int = 0> (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_BatchSize, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QNumHeads, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_NewKVSeqLen, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QKHeadSize)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_VAttentionShape = Concat <axis: int = 0> (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_BatchSize, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QNumHeads, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_NewKVSeqLen, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_VHeadSize)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KAttentionInput = Reshape (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KExpanded, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KAttentionShape)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_VAttentionInput = Reshape (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_VExpanded, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_VAttentionShape)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KTranspose = Transpose <perm: ints = [0, 1, 3, 2]> (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KAttentionInput)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QScaled = Mul (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QReshaped, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_ScaleFactorF)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KScaled = Mul (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KTranspose, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_ScaleFactorF)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QKAttnWeight = MatMul (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QScaled, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_KScaled)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QKAttnCast = Cast <to: int = 1> (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QKAttnWeight)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QKAttnWeightSoftcap = Add (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QKAttnCast, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_AttnBiasT)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_SoftmaxCast = Cast <to: int = 1> (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_QKAttnWeightSoftcap)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_AttnWeightSoftmax = Softmax (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_SoftmaxCast)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_SoftmaxOut = Cast <to: int = 1> (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_AttnWeightSoftmax)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_BiasRowMaxAxes = Constant <value: tensor = int64[1] {-1}> ()
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_BiasRowMax = ReduceMax (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_AttnBiasT, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_BiasRowMaxAxes)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_FloatNegInfT = CastLike (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_FloatNegInf, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_AttnBiasT)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_RowAllMasked = Equal (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_BiasRowMax, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_FloatNegInfT)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_ZeroProbT = CastLike (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_ScalarZero, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_SoftmaxOut)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_SoftmaxOutSafe = Where (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_RowAllMasked, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_ZeroProbT, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_SoftmaxOut)
   Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_YPreReshape = MatMul (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_SoftmaxOutSafe, Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_VAttentionInput)
   Y = Identity (Attention_test_attention_4d_attn_mask_bool_4d_expanded_function_YPreReshape)
}
"""

#: ONNX suite case ``test_attention_4d_with_qk_matmul``: an Attention node whose outputs
#: include empty names in the middle (``Y, "", "", qk_matmul_output``).
ATTENTION_EMPTY_OUTPUTS = """
<
   ir_version: 11,
   opset_import: ["" : 23],
   producer_name: "backend-test"
>
test_attention_4d_with_qk_matmul (float[2,3,4,8] Q, float[2,3,6,8] K, float[2,3,6,8] V) => (float[2,3,4,8] Y, float[2,3,4,6] qk_matmul_output) {
   Y, "", "", qk_matmul_output = Attention (Q, K, V)
}
"""
